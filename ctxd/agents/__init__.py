"""The agents ctxd knows, one line each, and the questions the rest of ctxd asks about them.

`AGENTS` names the agent modules: `ctxd/agents/<name>.py`, whose `AGENT` implements
`ctxd.agents.base.Agent` (docs/agents.md says what a module implements). Adding an agent is its
module, its line here and its tests: nothing else in ctxd names an agent. A module is imported
when it is first asked for, so `ctxd hook claude ...` imports Claude Code's module alone.

`register` adds an agent at run time (tests); `CTXD_AGENT_MODULES` (importable module names,
comma-separated, each defining `AGENT`) adds agents to every ctxd process started with it, so a
test can show an agent module followed by a daemon, hooked and installed without any other edit.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxd.agents.base import Agent

AGENTS = ("codex", "claude", "qwen", "gemini", "opencode")
STATUS_LINE_AGENT = "claude"
"""Whose status line `ctxd statusline` shows without `--agent` (the one installed before it existed)."""
MODULES_ENV = "CTXD_AGENT_MODULES"
NAME = re.compile(r"[a-z][a-z0-9]*\Z")
"""An agent's name: a thread prefix, a command-line word and a settings key all at once."""

_loaded: dict[str, Agent] = {}
_added: dict[str, Agent] = {}  # registered at run time, or from MODULES_ENV
_env_read: str | None = None


def _from_environment() -> None:
    """The agents MODULES_ENV names, added once per value of it."""
    global _env_read
    value = os.environ.get(MODULES_ENV, "")
    if value == _env_read:
        return
    _env_read = value
    for module in filter(None, (part.strip() for part in value.split(","))):
        try:
            register(importlib.import_module(module).AGENT)
        except Exception as error:  # noqa: BLE001 - a bad name is reported, never a failed ctxd
            import logging

            logging.getLogger("ctxd").warning("%s: agent module %r not added: %s: %s", MODULES_ENV, module,
                                              type(error).__name__, error)


def names() -> list[str]:
    """Every agent's name, the built-in ones first, in the registry's order."""
    if _env_read != os.environ.get(MODULES_ENV, ""):
        _from_environment()
    return [*AGENTS, *(name for name in _added if name not in AGENTS)]


def find(name: str) -> Agent | None:
    """The agent named `name`, or None when there is none."""
    if name not in AGENTS:
        names()  # the agents MODULES_ENV adds
        return _added.get(name)
    agent = _loaded.get(name)
    if agent is None:
        agent = _loaded[name] = importlib.import_module(f"ctxd.agents.{name}").AGENT
    return agent


def get(name: str) -> Agent:
    """The agent named `name` (KeyError when there is none)."""
    agent = find(name)
    if agent is None:
        raise KeyError(name)
    return agent


def every() -> list[Agent]:
    return [get(name) for name in names()]


def with_hooks() -> list[Agent]:
    """The agents with hook events (`ctxd hook <name>`, `ctxd hooks install --agent <name>`)."""
    return [agent for agent in every() if agent.hook_events]


def followed(thread: str) -> str | None:
    """The agent whose session `thread` mirrors (`<agent>:<session id>`), else None. `<agent>:`
    alone is one too: no client may write under an agent's name, whatever follows it."""
    agent, sep, _ = thread.partition(":")
    return agent if sep and agent in names() else None


def for_thread(thread: str) -> Agent | None:
    name = followed(thread)
    return get(name) if name is not None else None


def register(agent: Agent) -> None:
    """Add `agent` (a test's, or one MODULES_ENV names); its name must be new and a valid one."""
    if not NAME.match(agent.name) or agent.name in ("client", "acp"):  # "acp": `ctxd acp`'s threads (ctxd/acp)
        raise ValueError(f"{agent.name!r} is not an agent name (a lower-case word other than 'client' and 'acp')")
    if agent.name in AGENTS or _added.get(agent.name, agent) is not agent:
        raise ValueError(f"an agent named {agent.name!r} is registered already")
    _added[agent.name] = agent


def unregister(name: str) -> None:
    _added.pop(name, None)
