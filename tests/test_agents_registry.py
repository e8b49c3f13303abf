"""Issue #37: an agent is one module behind one declared interface (ctxd/agents/base.py), listed by
one line of the registry (ctxd/agents/__init__.py); nothing else in ctxd names it.

Every registered agent implements the interface. And the bar the next agents (qwen-code, Gemini
CLI, OpenCode) meet: an agent module written here, in the test, and added at run time
(`CTXD_AGENT_MODULES` for the processes, `agents.register` in this one) is followed by the real
daemon, hooked, installed and shown, with no other change to ctxd (docs/agents.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxd import agents
from ctxd.agents.base import Agent, HookAction, SessionStore
from ctxd.usage.breakdown import OVERHEAD_CATEGORIES
from tests.ghost_repo import IDENTITY
from tests.rpc import REPO, Client, RpcError, check_shape

TOY_MODULE = '''
"""A toy agent, all of it: its sessions are `<home>/sessions/<id>.jsonl` (a `start` line with the
session's id and folder, then `user` and `assistant` lines), its hooks are `BeforePrompt`,
`BeforeTool` and `Compacted` with payload fields of its own, its configuration is
`<home>/settings.json`, and its status line reads `{session, dir, used, window}`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxd.agents.base import Agent, AgentConfig, AgentLimits, HookAction, HookInput, StatusUsage
from ctxd.agents.jsonl import JsonlStore, Reader, entries, head
from ctxd.agents.session import Change, Turn, shorten


class ToyReader(Reader):
    agent = "toy"

    def record(self, rec: dict[str, Any], change: Change) -> None:
        session = self.session
        kind = rec.get("type")
        if kind == "start":
            session.id, session.cwd, session.model = rec.get("id"), rec.get("cwd"), rec.get("model")
            change.meta = True
        elif kind in ("user", "assistant"):
            text = str(rec.get("text", ""))
            part = "input_text" if kind == "user" else "output_text"
            item = {"type": "message", "role": kind, "content": [{"type": part, "text": text}]}
            if kind == "user":
                turn = Turn(len(session.items), shorten(text, 60), rec.get("at"), session.generation)
                session.turns.append(turn)
                change.turns.append(turn)
                if session.title is None:
                    session.title = shorten(text)
                    change.meta = True
            session.items.append(item)
            change.add(item, session)
            if isinstance(rec.get("tokens"), int):
                session.baseline, session.baseline_items = rec["tokens"], len(session.items)
                change.usage = True
        else:
            session.count_unknown(str(kind))


class ToySessions(JsonlStore):
    def session_files(self) -> list[str]:
        return [e.path for e in entries(str(self.root)) if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)]

    def is_session_file(self, path: str) -> bool:
        return Path(path).parent == self.root

    def peek_cwd(self, key: str, folders: Any) -> tuple[str | None, bool, int]:
        records, read = head(key, 1)
        if not records:
            return None, False, read
        cwd = records[0].get("cwd")
        return (cwd if isinstance(cwd, str) else None), True, read

    def reader(self, key: str) -> ToyReader:
        return ToyReader(key)


def _text(data: dict[str, Any], key: str) -> str | None:
    return data[key] if isinstance(data.get(key), str) else None


class Toy(Agent):
    name = "toy"
    title = "Toy Agent"
    version = "9.9"
    overhead = (("builtinTools", "the toy's own tools (inferred)", 1.0),)
    hook_events: Mapping[str, HookAction] = {"BeforePrompt": "turn", "BeforeTool": "tool", "Compacted": "compacted"}

    def home(self, env: Mapping[str, str], configured: str | None) -> Path:
        return Path(configured or env.get("TOY_HOME") or Path(env.get("HOME") or Path.home()) / ".toy").expanduser()

    def session_root(self, home: Path) -> Path:
        return home / "sessions"

    def sessions(self, root: Path) -> ToySessions:
        return ToySessions(root)

    def read_config(self, home: Path) -> AgentConfig:
        return AgentConfig()

    def limits(self, model: str | None, stated_window: int | None, config: AgentConfig) -> AgentLimits:
        return AgentLimits(100_000, "the toy's window", 80_000, "the toy's rule", 60_000)

    def hook_input(self, event: str, data: dict[str, Any]) -> HookInput:
        return HookInput(self.hook_events.get(event), _text(data, "session"), _text(data, "dir"), _text(data, "text"),
                         _text(data, "tool"), data.get("args"), _text(data, "call"))

    def changes_files(self, tool_name: str, tool_input: Any) -> bool:
        return tool_name in ("write", "shell")

    def tool_paths(self, tool_name: str, tool_input: Any) -> list[str]:
        path = tool_input.get("path") if isinstance(tool_input, dict) else None
        return [path] if isinstance(path, str) else []

    def shell_command(self, tool_name: str, tool_input: Any) -> str | None:
        return str(tool_input.get("cmd", "")) if tool_name == "shell" and isinstance(tool_input, dict) else None

    def _file(self, scope: str, project: Path) -> Path:
        return (self.home(os.environ, None) if scope == "user" else project / ".toy") / "settings.json"

    def config_changes(self, action: Any, scope: Any, project: Path, state_dir: Path, ctxd: list[str]) -> Any:
        from ctxd.agents.config import json_settings as js
        from ctxd.agents.config.ours import mcp_entry, shell
        from ctxd.agents.config.plan import json_install, json_uninstall, read_scoped

        path = self._file(scope, project)
        before = read_scoped(path, scope, project)
        hooks = js.Hooks({event: None for event in self.hook_events}, lambda e: shell([*ctxd, "hook", "toy", e]), 5)

        def remove(value: dict[str, Any]) -> dict[str, Any]:
            return js.mcp_remove(js.status_line_remove(js.hooks_remove(value)))

        def add(value: dict[str, Any]) -> dict[str, Any]:
            js.status_line_add(js.hooks_add(value, hooks), [*ctxd, "statusline", "--agent", "toy"])
            return js.mcp_add(value, mcp_entry(ctxd))

        def holds(text: str) -> bool:
            return js.holds(text, remove)

        if action == "install":
            return [json_install(path, before, add, holds)], []
        return [json_uninstall(path, before, remove, state_dir, holds)], []

    def config_status(self, scope: Any, project: Path) -> str:
        from ctxd.agents.config import json_settings as js
        from ctxd.agents.config.plan import read_scoped

        value = js.load(self._file(scope, project), read_scoped(self._file(scope, project), scope, project))
        events = js.hooks_installed(value, self.hook_events)
        return f"toy {scope}: hooks {', '.join(events) or 'none'}; MCP server {'yes' if js.mcp_installed(value) else 'no'}"

    def statusline_usage(self, data: dict[str, Any]) -> StatusUsage:
        used, window = data.get("used"), data.get("window")
        return StatusUsage(used if isinstance(used, int) else 0, 0, window if isinstance(window, int) else 100_000,
                           80_000, isinstance(used, int), None, None, _text(data, "session"), _text(data, "dir"))


AGENT = Toy()
'''


# --- every agent -----------------------------------------------------------------------------------


def test_every_registered_agent_implements_the_interface() -> None:
    names = agents.names()
    assert len(names) == len(set(names)) and {"codex", "claude"} <= set(names)
    actions = set(typing.get_args(HookAction))
    for name in names:
        agent = agents.get(name)
        assert isinstance(agent, Agent) and agent.name == name and agents.NAME.match(name) and name != "client"
        assert not getattr(type(agent), "__abstractmethods__", None), f"{name}: {type(agent).__abstractmethods__}"
        assert agent.title and agent.version
        assert {c for c, *_ in agent.overhead} <= set(OVERHEAD_CATEGORIES) and (
            not agent.overhead or abs(sum(share for *_, share in agent.overhead) - 1) < 1e-9), name
        assert set(agent.hook_events.values()) <= actions, name
        if agent.hook_events:  # an agent with hooks reads their payload and has entries to install
            assert type(agent).hook_input is not Agent.hook_input, name
            assert type(agent).config_changes is not Agent.config_changes, name
        home = agent.home({"HOME": "/home/u"}, None)
        assert home.is_absolute() and agent.home({"HOME": "/home/u"}, "/x/y") == Path("/x/y")
        store = agent.sessions(agent.session_root(home))
        assert store is None or isinstance(store, SessionStore)
        assert agents.followed(f"{name}:some-id") == name and agents.for_thread(f"{name}:x") is agent
    assert agents.followed("client:x") is None and agents.followed("codex") is None


def test_an_agent_name_is_one_word_and_taken_once() -> None:
    toy = _toy_module(None)
    for bad in ("Toy", "to y", "client", "acp", "codex", "", "a:b"):  # "acp": `ctxd acp`'s threads
        other = type(toy.AGENT)()
        other.name = bad
        with pytest.raises(ValueError):
            agents.register(other)
    agents.register(toy.AGENT)
    try:
        assert agents.get("toy") is toy.AGENT and "toy" in agents.names()
        with pytest.raises(ValueError):
            agents.register(type(toy.AGENT)())  # another object under a name taken
    finally:
        agents.unregister("toy")
    assert agents.find("toy") is None and "toy" not in agents.names()


def test_an_acp_session_is_no_agent_module_yet_read_only_and_served_by_ctxd_mcp() -> None:
    """`acp:<id>` threads are recorded by a `ctxd acp` proxy (ctxd/acp), not mirrored by an agent
    module: no client may write them, and `ctxd mcp` serves them (CTXD_SESSION=acp:<id>)."""
    from ctxd.mcp.backend import _served
    from ctxd.workspace import agent_title, followed_agent

    assert agents.followed("acp:s1") is None and agents.find("acp") is None
    assert followed_agent("acp:s1") == "acp" and agent_title("acp") == "ctxd acp"
    assert followed_agent("claude:s1") == "claude" and followed_agent("default") is None
    assert followed_agent("acpx:s1") is None and followed_agent("my-acp:s1") is None
    assert _served("acp:s1") and _served("codex:s1") and not _served("default") and not _served("acpx:s1")


def test_the_settings_take_sources_of_every_agent_and_refuse_others(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxd.settings import load_settings

    toy = _toy_module(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    agents.register(toy.AGENT)
    try:
        problems: list[Any] = []
        settings = load_settings(None, {"sources": {"toy": False, "toyHome": "/t", "claudeHome": "/c", "codex": True,
                                                    "nope": True, "claude": "yes"}}, problems)
        assert not settings.sources.follows("toy") and settings.sources.home("toy") == "/t"
        assert settings.sources.home("claude") == "/c" and settings.sources.follows("codex")
        assert settings.sources.follows("claude")  # a bad value keeps the default
        assert {p.key for p in problems} == {"sources.nope", "sources.claude"}
        assert "unknown setting 'sources.nope'" in next(p.message for p in problems if p.key == "sources.nope")
    finally:
        agents.unregister("toy")
    problems = []
    load_settings(None, {"sources": {"toy": False}}, problems)
    assert [p.key for p in problems] == ["sources.toy"]  # an agent ctxd does not know


# --- a new agent, end to end -----------------------------------------------------------------------


def _toy_module(folder: Path | None) -> Any:
    """The toy agent's module, written to `folder` (importable from there) or imported in memory."""
    import importlib.util

    if folder is not None:
        (folder / "toyagent.py").write_text(TOY_MODULE)
    spec = importlib.util.spec_from_loader("toyagent", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(TOY_MODULE, "toyagent.py", "exec"), module.__dict__)  # noqa: S102 - the test's own module text
    return module


class Toy:
    """The toy agent's world: its module importable by every ctxd process started with `env`, its
    home, a git project it works in, one session of it."""

    def __init__(self, tmp_path: Path) -> None:
        self.mods = tmp_path / "mods"
        self.mods.mkdir()
        _toy_module(self.mods)
        self.home = tmp_path / "toyhome"
        self.user = tmp_path / "user"
        self.user.mkdir()
        self.state = tmp_path / "state"
        self.project = tmp_path / "proj"
        self.project.mkdir()
        for args in (["init", "-q"], ["add", "-A"]):
            subprocess.run(["git", *args], cwd=self.project, check=True)
        (self.project / "app.py").write_text("print('v1')\n")
        subprocess.run(["git", "add", "-A"], cwd=self.project, check=True)
        subprocess.run(["git", "commit", "-qm", "init"], cwd=self.project, check=True, env={**os.environ, **IDENTITY})
        self.env = {"CTXD_AGENT_MODULES": "toyagent", "PYTHONPATH": f"{self.mods}{os.pathsep}{REPO}",
                    "TOY_HOME": str(self.home), "HOME": str(self.user)}
        self.session = self.home / "sessions" / "t-1.jsonl"
        self.session.parent.mkdir(parents=True)
        lines = [{"type": "start", "id": "t-1", "cwd": str(self.project), "model": "toy-1"},
                 {"type": "user", "text": "Add a feature", "at": "2026-01-01T10:00:00Z"},
                 {"type": "assistant", "text": "Done.", "tokens": 30_000}]
        self.session.write_text("".join(json.dumps(line) + "\n" for line in lines))

    def run(self, *args: str, stdin: dict[str, Any] | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
        """`ctxd <args>` as the agent or the user runs it, in this world."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "CODEX_", "CLAUDE_"))}
        env.update(self.env, XDG_STATE_HOME=str(self.state), XDG_CONFIG_HOME=str(self.user / ".config"),
                   CODEX_HOME=str(self.state / "codex-home"), CLAUDE_CONFIG_DIR=str(self.state / "claude-home"),
                   GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", CTXD_OWNER_IDLE_SECONDS="5", **IDENTITY)
        return subprocess.run([sys.executable, "-m", "ctxd", *args], cwd=cwd or self.project, env=env, text=True,
                              input=json.dumps(stdin) if stdin is not None else "", capture_output=True,
                              timeout=60)  # a guard against a hang, not a speed check


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Toy]:
    yield Toy(tmp_path)


def _until(what: Callable[[], Any], timeout: float = 30.0) -> Any:
    """`what()` once it is truthy; fails after `timeout` (only a hang gets there)."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found or time.monotonic() > deadline:
            assert found, "not within the time"
            return found
        time.sleep(0.1)


def test_a_new_agent_module_is_followed_hooked_installed_and_shown(toy: Toy, daemon_factory: Callable[..., Client],
                                                                   state_dir: Path) -> None:
    assert state_dir == toy.state  # the daemon's state dir is the toy world's (conftest's fixture)
    client = daemon_factory([toy.project], env=toy.env)
    uri = toy.project.as_uri()
    assert client.initialize_result["capabilities"]["experimental"]["ctxd"]["agents"]["toy"] == "Toy Agent"

    # Followed: the daemon reads its session into a read-only thread of its own, with its limits.
    def listed() -> dict[str, Any] | None:
        threads = client.request("ctxd/threads", {"workspace": uri})["threads"]
        return next((t for t in threads if t["thread"] == "toy:t-1"), None)

    thread = _until(listed)
    assert (thread["source"], thread["title"], thread["readOnly"]) == ("toy", "Add a feature", True)
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "toy"]
    assert (source["version"], source["enabled"], source["sessions"]) == ("9.9", True, 1)
    assert source["root"] == str(toy.home / "sessions")
    breakdown = client.request("ctxd/usage", {"workspace": uri, "thread": "toy:t-1"})
    assert check_shape("ctxd/usage", breakdown) is None
    usage = breakdown["usage"]
    assert (usage["usedTokens"], usage["contextWindow"], usage["autoCompactLimit"]) == (30_000, 100_000, 80_000)
    with pytest.raises(RpcError) as refused:
        client.request("ctxd/record", {"workspace": uri, "thread": "toy:t-1",
                                       "items": [{"type": "message", "role": "user", "content": "x"}]})
    assert "follows Toy Agent's session" in str(refused.value)

    # Hooked: its own events and payload fields, a checkpoint before its turn and its shell tool.
    base = {"session": "t-1", "dir": str(toy.project)}
    assert toy.run("hook", "toy", "BeforePrompt", stdin={**base, "text": "Make it blue"}).returncode == 0
    (toy.project / "app.py").write_text("print('v2')\n")
    shell = {**base, "tool": "shell", "call": "c-1", "args": {"cmd": "sed -i s/v2/v3/ app.py"}}
    assert toy.run("hook", "toy", "BeforeTool", stdin=shell).returncode == 0
    assert toy.run("hook", "toy", "BeforeTool", stdin={**base, "tool": "read", "args": {}}).returncode == 0

    def snapshots() -> dict[str, dict[str, Any]] | None:
        found = client.request("ctxd/ghost/list", {"workspace": uri})["snapshots"]
        mine = {s["message"]: s for s in found if s.get("thread") == "toy:t-1"}
        return mine if len(mine) == 2 else None

    by_message = _until(snapshots)
    turn, tool = by_message["Make it blue"], by_message["before shell: sed -i s/v2/v3/ app.py"]
    assert turn["trigger"] == "turn" and turn["turn"] == {"index": 1, "text": "Make it blue"}
    assert tool["trigger"] == "tool" and tool["tool"] == {"name": "shell", "callId": "c-1"}

    # Shown: its status line, whose usage reaches the daemon's gauge; `ctxd sessions`.
    seen = len(client.notifications)
    line = toy.run("statusline", "--agent", "toy", "--no-colour",
                   stdin={**base, "used": 40_000, "window": 100_000}).stdout
    assert line.startswith("toy · 50% of 80k"), line
    pushed = client.wait_for_notification("ctxd/usageChanged", lambda p: p["thread"] == "toy:t-1", timeout=15,
                                          after=seen)
    assert pushed["usedTokens"] == 40_000
    rows = json.loads(toy.run("sessions", "--format", "json").stdout)
    [row] = [r for r in rows if r["agent"] == "toy"]
    assert (row["thread"], row["autoCompactLimit"], row["title"]) == ("toy:t-1", 80_000, "Add a feature")
    assert "--toy-home" in toy.run("sessions", "--help").stdout

    # Installed: its hooks, status line and MCP server in its own file; status; uninstall.
    done = toy.run("hooks", "install", "--agent", "toy")
    assert done.returncode == 0, done.stderr
    settings = json.loads((toy.home / "settings.json").read_text())
    assert [h["hooks"][0]["command"].split()[-3:] for h in settings["hooks"]["BeforePrompt"]] == [
        ["hook", "toy", "BeforePrompt"]]
    assert settings["statusLine"]["command"].split()[-3:] == ["statusline", "--agent", "toy"]
    assert settings["mcpServers"]["ctxd"]["args"][-1] == "mcp"
    status = toy.run("hooks", "status").stdout
    assert "toy user: hooks BeforePrompt, BeforeTool, Compacted; MCP server yes" in status
    assert "codex user:" in status and "claude user:" in status
    assert toy.run("hooks", "uninstall", "--agent", "toy").returncode == 0
    assert not (toy.home / "settings.json").exists()  # install made it: nothing of the user's was in it


def test_a_workspace_can_turn_the_new_agent_off(toy: Toy, daemon_factory: Callable[..., Client]) -> None:
    """`sources.toy = false` in the editor's settings: its sessions are not followed."""
    client = daemon_factory([toy.project], {"sources": {"toy": False}}, env=toy.env)
    uri = toy.project.as_uri()
    [source] = [s for s in client.request("ctxd/status", {"workspace": uri})["sources"] if s["agent"] == "toy"]
    assert source["enabled"] is False and not client.request("ctxd/status", {"workspace": uri})["problems"]
    client.request("ctxd/sessions/sync", {"workspace": uri})
    assert not [t for t in client.request("ctxd/threads", {"workspace": uri})["threads"] if t["thread"].startswith("toy:")]
