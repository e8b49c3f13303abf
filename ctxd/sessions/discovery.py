"""Where the agents keep their sessions (each agent's module says: ctxd/agents), and which workspace
folder a session belongs to (`ctxd.agents.folders`).

Privacy rule: a session outside every open workspace folder is never read beyond its head (the
agent's `peek_cwd`; for Codex the first line, for Claude Code a few lines, and only when its
project folder's name could be inside an open folder).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxd import agents
from ctxd.agents.base import SessionStore
from ctxd.agents.folders import Folders, folder_of

__all__ = ["Folders", "Source", "agent_of", "folder_of", "sources"]


@dataclass(frozen=True)
class Source:
    agent: str
    root: Path  # the folder the agent keeps its sessions under
    enabled: bool = True
    store: SessionStore | None = None  # None: nothing on disk to follow


def sources(homes: Mapping[str, str | None] | None = None, *, enabled: Mapping[str, bool] | None = None,
            env: Mapping[str, str] | None = None) -> list[Source]:
    """Every agent's sessions: `homes` (the settings' `sources.<agent>_home`) or its default home;
    `enabled` (the settings' `sources.<agent>`, default true)."""
    env = os.environ if env is None else env
    found = []
    for agent in agents.every():
        root = agent.session_root(agent.home(env, (homes or {}).get(agent.name)))
        found.append(Source(agent.name, root, (enabled or {}).get(agent.name, True), agent.sessions(root)))
    return found


def agent_of(path: str, roots: Mapping[str, Path]) -> str | None:
    """Which agent's session `path` is, or None when it is not one (`roots`: agent -> its root)."""
    for name, root in roots.items():
        agent = agents.find(name)
        store = agent.sessions(root) if agent is not None else None
        if store is not None and store.owns(path):
            return name
    return None
