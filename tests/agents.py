"""The real agents, pinned, for end-to-end tests: Codex CLI and Claude Code
(tests/test_real_agents.py), qwen-code, Gemini CLI and OpenCode (tests/test_new_agents_smoke.py),
Claude Code's ACP adapter and the official ACP client library (tests/test_acp*.py).

`install()` fetches an agent from the npm registry once per machine into
`$XDG_CACHE_HOME/ctxd-tests/agents/<package>@<version>` (default `~/.cache`): npm installs into a
temporary folder beside it, the binary is tried, and only then the folder is renamed into place,
so an interrupted install is never reused. Without npm the tests skip, saying so.

`Codex`, `Claude`, `Qwen`, `Gemini` and `OpenCode` run one agent non-interactively in a home of
its own (CODEX_HOME, CLAUDE_CONFIG_DIR, QWEN_HOME, GEMINI_CLI_HOME, XDG_*, HOME), pointed at a
scripted model server (tests/model_servers.py) on 127.0.0.1, with telemetry, update checks and
other traffic off: nothing leaves the machine. docs/agents-research.md says where each keeps
its sessions and why each switch is there.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.model_servers import ChatCompletionsServer, GeminiServer, MessagesServer, ResponsesServer

CODEX = ("@openai/codex", "0.171.0", "codex")  # package, version, executable
CLAUDE = ("@anthropic-ai/claude-code", "2.1.332", "claude")
QWEN = ("@qwen-code/qwen-code", "0.24.4", "qwen")
GEMINI = ("@google/gemini-cli", "0.61.0", "gemini")
OPENCODE = ("opencode-ai", "1.18.33", "opencode")  # the npm package carries the platform binary
CLAUDE_ACP = ("@agentclientprotocol/claude-agent-acp", "0.101.0", "claude-agent-acp")  # Claude Code 2.1.318 inside
ACP_SDK = ("@agentclientprotocol/sdk", "2.4.0")  # the official ACP client library (tests/acp_client)
CODEX_MODEL = "gpt-5.5"  # in Codex 0.171's own model catalogue (tools: exec_command, apply_patch)
CLAUDE_MODEL = "claude-sonnet-4-5"
QWEN_MODEL = "qwen3-coder-plus"
GEMINI_MODEL = "gemini-2.5-pro"  # Gemini CLI's own default model (window 1,048,576, as every model but Gemma's)
OPENCODE_MODEL = "qwen3-coder-plus"  # served by a provider "fake" of opencode.json (OpenAI-compatible)
RUN_TIMEOUT = 180.0  # seconds for one agent run: only a hung agent comes near
START_RETRIES = 3  # runs again of an agent that failed at its start with "database is locked" (OpenCode)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ctxd-tests" / "agents"


def install(package: tuple[str, str, str]) -> Path:
    """The agent's executable, installed from the npm registry on first use."""
    name, version, command = package
    prefix = _install(name, version, lambda folder: _binary(folder, command) is not None)
    found = _binary(prefix, command)
    assert found is not None
    return found


def install_library(package: tuple[str, str]) -> Path:
    """An npm library's folder (`node_modules/<name>`), installed on first use like the agents."""
    name, version = package
    prefix = _install(name, version, lambda folder: (folder / "node_modules" / name / "package.json").is_file())
    return prefix / "node_modules" / name


def _install(name: str, version: str, works: Callable[[Path], bool]) -> Path:
    """The install's prefix folder, `works` on it: npm installs into a temporary folder beside it,
    which is renamed into place only once `works`."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the real-agent tests install the pinned agents with it")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{name.replace('/', '+')}@{version}"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes install once
        if works(final):
            return final
        shutil.rmtree(final, ignore_errors=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            done = subprocess.run([npm, "install", "--prefix", str(temp), "--no-audit", "--no-fund",
                                   "--no-save", "--loglevel=error", f"{name}@{version}"],
                                  capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                pytest.fail(f"npm install {name}@{version} failed: {done.stderr.strip()[-2000:]}")
            if not works(temp):
                pytest.fail(f"{name}@{version} installed but does not work")
            temp.rename(final)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        return final


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
               if not k.startswith(("OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE_", "CTXD_", "QWEN_", "GEMINI_",
                                    "GOOGLE_", "OPENCODE_"))}
        env.update(QUIET)
        env["HOME"] = str(self.base / "home")
        env["XDG_CONFIG_HOME"] = str(self.base / "home" / ".config")
        env["XDG_CACHE_HOME"] = str(self.base / "home" / ".cache")
        env["XDG_STATE_HOME"] = str(self.base / "home" / ".local" / "state")
        env["XDG_DATA_HOME"] = str(self.base / "home" / ".local" / "share")
        env["CTXD_OWNER_IDLE_SECONDS"] = "20"  # the owner the agents' hooks start ends soon after their test
        # OpenCode (a Bun executable) unpacks a native module (5.5 MB) into the temporary folder at every
        # start: into the test's folder, not a file in /tmp left behind by each run.
        env["TMPDIR"] = str(self.base / "tmp")
        (self.base / "tmp").mkdir(parents=True, exist_ok=True)
        return env

    def _run(self, args: list[str], cwd: Path) -> Run:
        env = self.env()
        env["PWD"] = str(cwd)  # as a shell sets it: OpenCode takes its folder from PWD, not from its cwd
        done = subprocess.run([str(self.exe), *args], cwd=str(cwd), env=env, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
        for attempt in range(1, START_RETRIES + 1):
            if done.returncode == 0 or "database is locked" not in done.stderr + done.stdout or "{" in done.stdout:
                break
            # OpenCode 1.18.33 sometimes fails so at its start on a loaded machine, before it reads the
            # prompt (seen on every branch at load 6-12, in 1 of 2-3 runs; twice in a row once, in a
            # newcomer's run at load 2-3): again after a pause, as a user would. A failure after its
            # start (some JSON printed) is never run again.
            print(f"{self.exe.name} failed at its start with 'database is locked'; running it again ({attempt})")
            time.sleep(attempt)
            done = subprocess.run([str(self.exe), *args], cwd=str(cwd), env=env, capture_output=True,
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


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it, objects merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _session_id(run: Run) -> str:
    """The `session_id` of a `-o json` answer: qwen prints a list of events, Gemini CLI one object."""
    answer = run.json()
    for event in answer if isinstance(answer, list) else [answer]:
        if isinstance(event, dict) and isinstance(event.get("session_id"), str):
            return str(event["session_id"])
    raise AssertionError(f"no session_id in the agent's output:\n{run.stdout[-2000:]}")


class Qwen(_Agent):
    """qwen-code headless (`qwen --yolo -o json PROMPT`) against a ChatCompletionsServer, in QWEN_HOME
    `home` (its sessions: home/projects/<cwd, non-alphanumerics as '-'>/chats/<session>.jsonl).

    `settings` is laid over the user settings.json this writes (hooks, ui.statusLine, model...)."""

    def __init__(self, base: Path, home: Path, server: ChatCompletionsServer,
                 settings: dict[str, Any] | None = None, extra_env: dict[str, str] | None = None) -> None:
        super().__init__(install(QWEN), base)
        self.home = home
        self.server = server
        self.extra_env = extra_env or {}
        home.mkdir(parents=True, exist_ok=True)
        own = {
            "$version": 4,  # else qwen rewrites the file on start to stamp its settings version
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": QWEN_MODEL},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False},
        }
        (home / "settings.json").write_text(json.dumps(_merged(own, settings or {}), indent=2) + "\n")

    def env(self) -> dict[str, str]:
        env = self._env()
        env["QWEN_HOME"] = str(self.home)
        env["OPENAI_BASE_URL"] = f"{self.server.base_url}/v1"
        env["OPENAI_API_KEY"] = "sk-test-not-a-key"
        env["OPENAI_MODEL"] = QWEN_MODEL
        env["QWEN_CODE_SUPPRESS_YOLO_WARNING"] = "1"
        env.update(self.extra_env)
        return env

    def prompt(self, prompt: str, cwd: Path, resume: str | None = None) -> Run:
        """One headless run; `prompt` may be a slash command that works headless (`/compress`)."""
        args = ["--yolo", "-o", "json"]
        if resume:
            args += ["--resume", resume]
        return self._run([*args, prompt], cwd)

    def compress(self, cwd: Path, session: str) -> Run:
        """qwen's `/compress` (supported headless): the history is summarised by the model."""
        return self.prompt("/compress", cwd, resume=session)

    session_id = staticmethod(_session_id)

    def session_file(self, cwd: Path, session: str) -> Path:
        project = "".join(c if c.isascii() and c.isalnum() else "-" for c in str(cwd))
        return self.home / "projects" / project / "chats" / f"{session}.jsonl"


class Gemini(_Agent):
    """Gemini CLI headless (`gemini -p PROMPT --yolo -o json`) against a GeminiServer, with
    GEMINI_CLI_HOME `home` (its state: home/.gemini; sessions under .gemini/tmp/<project>/chats/).

    Each folder in `trusted` is written to trustedFolders.json, as a user who trusted it would
    (else the CLI refuses to run headless there, and ignores the folder's own settings and hooks).
    `settings` is laid over the user settings.json this writes.

    To compact: Gemini CLI compresses before a request once the last reply's prompt tokens reach
    `model.compressionThreshold` (0.5) of 1,048,576, so a tool-call reply reporting 600,000 input
    makes the same run compress before its next request. A headless `/compress` is no use: it
    starts the compression without waiting and sends "/compress" to the model as well."""

    def __init__(self, base: Path, home: Path, server: GeminiServer, trusted: list[Path],
                 settings: dict[str, Any] | None = None, extra_env: dict[str, str] | None = None) -> None:
        super().__init__(install(GEMINI), base)
        self.home = home
        self.server = server
        self.extra_env = extra_env or {}
        state = home / ".gemini"
        state.mkdir(parents=True, exist_ok=True)
        own = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "model": {"name": GEMINI_MODEL},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        }
        (state / "settings.json").write_text(json.dumps(_merged(own, settings or {}), indent=2) + "\n")
        (state / "trustedFolders.json").write_text(
            json.dumps({str(folder): "TRUST_FOLDER" for folder in trusted}, indent=2) + "\n")

    def env(self) -> dict[str, str]:
        env = self._env()
        env["GEMINI_CLI_HOME"] = str(self.home)
        env["GOOGLE_GEMINI_BASE_URL"] = self.server.base_url
        env["GEMINI_API_KEY"] = "test-not-a-key"
        env.update(self.extra_env)
        return env

    def prompt(self, prompt: str, cwd: Path, resume: str | None = None) -> Run:
        args = ["-p", prompt, "--yolo", "-o", "json"]
        if resume:
            args += ["--resume", resume]  # a session id, "latest" or an index
        return self._run(args, cwd)

    session_id = staticmethod(_session_id)

    def chats(self, cwd: Path) -> Path:
        """The project's chats folder: its short id is the one projects.json gives the folder."""
        projects = json.loads((self.home / ".gemini" / "projects.json").read_text())["projects"]
        return self.home / ".gemini" / "tmp" / projects[str(cwd)] / "chats"

    def session_file(self, cwd: Path, session: str) -> Path:
        """The session's file as `--resume` finds it: of the files named for its id, the one whose
        header started first (a run resumed in a later minute also leaves a file of two lines)."""
        def started(path: Path) -> str:
            header = json.loads(path.read_text().splitlines()[0])
            return str(header["startTime"]) if header.get("sessionId") == session else "~"
        return min(self.chats(cwd).glob(f"session-*-{session[:8]}.jsonl"), key=started)


class OpenCode(_Agent):
    """OpenCode headless (`opencode run --format json PROMPT`) against a ChatCompletionsServer, through
    a provider "fake" (`@ai-sdk/openai-compatible`, `baseURL`) in XDG_CONFIG_HOME/opencode/opencode.json.
    Its sessions are rows of XDG_DATA_HOME/opencode/opencode.db (`database`).

    `context` and `output` are the model's limits: OpenCode compacts by itself once a step's tokens
    reach context - min(output, 32000) (a low `context` makes a test compact). `config` is laid
    over the opencode.json this writes."""

    def __init__(self, base: Path, server: ChatCompletionsServer, context: int = 128_000, output: int = 8_192,
                 config: dict[str, Any] | None = None, extra_env: dict[str, str] | None = None) -> None:
        super().__init__(install(OPENCODE), base)
        self.server = server
        self.extra_env = extra_env or {}
        self.config_dir = base / "home" / ".config" / "opencode"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        own = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible", "name": "Fake",
                "options": {"baseURL": f"{server.base_url}/v1", "apiKey": "sk-test-not-a-key"},
                "models": {OPENCODE_MODEL: {
                    "name": "Qwen3 Coder Plus", "limit": {"context": context, "output": output},
                    # USD per million tokens: OpenCode prices each step with them (message.cost, session.cost)
                    "cost": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25}}},
            }},
            "model": f"fake/{OPENCODE_MODEL}",
            "small_model": f"fake/{OPENCODE_MODEL}",
            "autoupdate": False,
            "share": "disabled",
            "permission": {"edit": "allow", "bash": "allow", "external_directory": "allow"},
        }
        (self.config_dir / "opencode.json").write_text(json.dumps(_merged(own, config or {}), indent=2) + "\n")
        # OpenCode installs @opencode-ai/plugin with npm into every config folder that lacks a
        # node_modules or whose package-lock does not list it: as on a machine where it already did.
        (self.config_dir / "node_modules").mkdir(exist_ok=True)
        lock = {"name": "opencode", "lockfileVersion": 3,
                "packages": {"": {"dependencies": {"@opencode-ai/plugin": OPENCODE[1]}}}}
        (self.config_dir / "package-lock.json").write_text(json.dumps(lock, indent=2) + "\n")

    @property
    def data(self) -> Path:
        return self.base / "home" / ".local" / "share" / "opencode"

    @property
    def database(self) -> Path:
        return self.data / "opencode.db"

    def env(self) -> dict[str, str]:
        env = self._env()
        env.update({
            "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            # were OpenCode to install a package after all, the request lands on the fake server
            "npm_config_registry": f"{self.server.base_url}/npm/",
        })
        env.update(self.extra_env)
        return env

    def run(self, prompt: str, cwd: Path, session: str | None = None) -> Run:
        args = ["run", "--format", "json"]
        if session:
            args += ["--session", session]
        return self._run([*args, prompt], cwd)

    @staticmethod
    def session_id(run: Run) -> str:
        """The `sessionID` of `--format json`'s events (one JSON object a line)."""
        for line in run.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("sessionID"), str):
                return str(event["sessionID"])
        raise AssertionError(f"no sessionID in opencode's output:\n{run.stdout[-2000:]}")
